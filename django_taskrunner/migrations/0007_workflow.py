from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_taskrunner', '0006_task_cancel_permission'),
    ]

    operations = [
        migrations.CreateModel(
            name='Workflow',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'verbose_name': 'workflow',
                'verbose_name_plural': 'workflows',
                'permissions': [('cancel_workflow', 'Can cancel a running workflow')],
                'managed': False,
                'default_permissions': ('view',),
            },
        ),
    ]
